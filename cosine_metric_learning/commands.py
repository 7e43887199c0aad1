"""The one flag system of every command.

A command's settings are dataclasses whose fields are its flags: each
field (made by :func:`setting`) carries its default, help text, check,
whether it is required and the names the library gives the value
(``arguments``: the model file is ``path`` to ``encoder.load`` and
``--model`` to the commands). :func:`define` makes absl flags of the
fields, :func:`values` makes the settings object of the parsed flags,
and :func:`run` runs the command with its errors as one line, a library
error naming an argument shown with the flag the value came from. This
module imports neither TensorFlow nor any command.
"""

import dataclasses
import sys
import typing

from absl import flags

from cosine_metric_learning.errors import UsageError, report_errors

FLAGS = flags.FLAGS


def setting(default, help, check=None, *, arguments=(), required=False):
    """A settings field: its flag's default and help, its check (value ->
    what is expected, or None), the library's other names for its value,
    and whether the command needs it."""
    return dataclasses.field(default=default, metadata={
        "help": help, "check": check, "arguments": tuple(arguments),
        "required": required})


def one_of(choices):
    """The check of an enum setting (its flag takes only ``choices``)."""
    def check(value):
        return None if value in choices else \
            f"expected one of {', '.join(choices)}"
    check.choices = list(choices)
    return check


def choices(field):
    """The allowed values of an enum setting, else None."""
    return getattr(field.metadata.get("check"), "choices", None)


class Validated:
    """Settings that check their values (each field's check)."""

    def validate(self):
        """Raise a UsageError naming the first setting out of range."""
        for field in dataclasses.fields(self):
            check = field.metadata.get("check")
            value = getattr(self, field.name)
            problem = check(value) if check else None
            if problem:
                raise UsageError(f"--{field.name}={value}: {problem}")


def _fields(classes):
    """Each field of the settings classes once (a field shared through a
    base class is one field)."""
    seen = {}
    for config in classes:
        for field in dataclasses.fields(config):
            seen.setdefault(field.name, field)
    return list(seen.values())


def define(classes, defaults=None):
    """Define a flag for every field of the settings classes, each listed
    by the program's ``--help``; ``defaults`` overrides some fields'
    defaults (an entry point's dataset)."""
    defaults = defaults or {}
    for field in _fields(classes):
        default = defaults.get(field.name, field.default)
        if field.name == "log_dir":
            # absl.logging already defines --log_dir (for log files it
            # only writes when asked to); the original's flag takes it
            FLAGS.set_default("log_dir", default)
            FLAGS["log_dir"].help = field.metadata["help"]
        else:
            _define(field, default)
        if field.metadata.get("required"):
            flags.mark_flag_as_required(field.name)
        FLAGS.register_key_flag_for_module(sys.argv[0], FLAGS[field.name])


def _define(field, default):
    name, help_text = field.name, field.metadata["help"]
    allowed = choices(field)
    kind = typing.get_args(field.type) or (field.type,)
    if allowed:
        flags.DEFINE_enum(name, default, allowed, help_text)
    elif bool in kind:
        flags.DEFINE_boolean(name, default, help_text)
    elif int in kind:
        flags.DEFINE_integer(name, default, help_text)
    elif float in kind:
        flags.DEFINE_float(name, default, help_text)
    else:
        flags.DEFINE_string(name, default, help_text)


def values(config_class, **fixed):
    """The settings object of ``config_class`` with the parsed flags'
    values (``fixed`` ones set by the command), checked."""
    config = config_class(**{
        field.name: fixed[field.name] if field.name in fixed
        else FLAGS[field.name].value
        for field in dataclasses.fields(config_class)})
    if isinstance(config, Validated):
        config.validate()
    return config


def flag_names(classes):
    """``{library argument: flag}`` of the settings classes: each field's
    own name and its ``arguments``."""
    names = {}
    for field in _fields(classes):
        for argument in (field.name, *field.metadata.get("arguments", ())):
            names.setdefault(argument, f"--{field.name}")
    return names


def run(argv, run_command, classes):
    """Run a command's ``run_command()`` (which returns its exit status)
    after absl parsed the flags of its settings ``classes``: its errors
    are one line on stderr and a status (see errors.report_errors)."""
    return report_errors(argv, run_command, flag_names(classes))
