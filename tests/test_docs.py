"""The docs cannot drift from the code: every command line shown in
README.md and docs/*.md names an entry point that exists and only flags
that it defines (read from the entry point's own help, not grepped), every
make target and variable is the Makefile's, every extra is setup.cfg's,
and every Python example compiles and imports names that exist."""

import ast
import concurrent.futures
import configparser
import glob
import importlib
import importlib.util
import os
import re
import shlex
import sys

import pytest

from tests import conftest
from tests.conftest import ROOT

DOCS = [os.path.join(ROOT, "README.md")] + sorted(
    glob.glob(os.path.join(ROOT, "docs", "*.md")))
SHELL_BLOCKS = ("sh", "bash", "shell", "console")
PYTHONS = ("python", "python3", ".venv/bin/python")
# other projects' commands the docs show, and shell utilities: their flags
# are not ours to check
OTHER_PROGRAMS = {
    "deep_sort_app.py": "Deep SORT's application",
    "tools/generate_detections.py": "Deep SORT's feature generator",
    "tensorboard": "TensorBoard", "ls": "a shell utility"}
SEPARATORS = {";", "&&", "||", "|", "&"}


def _blocks(path):
    """``(language, first line number, text)`` of each fenced block."""
    text = open(path).read()
    for match in re.finditer(r"^ *```(\w*)\n(.*?)^ *```", text,
                             re.M | re.S):
        yield (match.group(1), text[:match.start()].count("\n") + 2,
               match.group(2))


def _commands(path):
    """``(where, argv)`` of every command in the file's shell blocks:
    continuation lines joined, comments dropped, split at ``;``, ``&&``,
    ``|`` and ``&``, leading ``VAR=value`` assignments dropped."""
    for language, line, text in _blocks(path):
        if language not in SHELL_BLOCKS:
            continue
        lines = text.splitlines()
        for offset, command in enumerate(lines):
            if offset and lines[offset - 1].endswith("\\"):
                continue  # joined to the line before
            for following in lines[offset + 1:]:
                if not command.endswith("\\"):
                    break
                command = command[:-1] + " " + following
            command = re.sub(r"^\s*\$ ", "", command)  # a prompt
            # [--flag] marks an optional flag
            words = [w.strip("[]") if w.startswith("[--") else w
                     for w in shlex.split(command, comments=True)]
            argv = []
            for word in words + [";"]:
                if word in SEPARATORS:
                    while argv and re.fullmatch(r"\w+=.*", argv[0]):
                        argv.pop(0)
                    if argv:
                        yield f"{os.path.relpath(path, ROOT)}:" \
                              f"{line + offset}", argv
                    argv = []
                else:
                    argv.append(word)


def _inline_commands(path):
    """``(where, argv)`` of the commands in the file's inline code
    (`` `python ...` ``, `` `make ...` ``), which may wrap lines."""
    text = open(path).read()
    text = re.sub(r"^ *```.*?^ *```", lambda m: "\n" * m.group(0).count(
        "\n"), text, flags=re.M | re.S)
    for match in re.finditer(r"`((?:python3?|make) [^`]+)`", text):
        where = f"{os.path.relpath(path, ROOT)}:" \
                f"{text[:match.start()].count(chr(10)) + 1}"
        yield where, shlex.split(match.group(1).replace("\n", " "))


def _all_commands():
    return [c for path in DOCS
            for c in (*_commands(path), *_inline_commands(path))]


def _entry_point(argv):
    """``(entry point, its arguments)`` for a Python command (a script of
    the repository, ``-m module`` or ``-m module subcommand``), else
    ``(program, arguments)``."""
    if argv[0] in PYTHONS:
        if argv[1] == "-m":  # a subcommand (search build) is the entry's
            if len(argv) > 3 and re.fullmatch(r"[a-z]+", argv[3]):
                return ("-m", argv[2], argv[3]), argv[4:]
            return ("-m", argv[2]), argv[3:]
        return argv[1], argv[2:]
    return argv[0], argv[1:]


def _defined_flags(entry):
    """The flags the entry point's parser accepts, from its own help
    (absl's ``--helpfull``, else argparse's ``--help``): ``{name: is
    boolean}``."""
    command = [sys.executable, *entry] if isinstance(entry, tuple) else [
        sys.executable, os.path.join(ROOT, entry)]
    def run(help_flag):
        return conftest.run(command + [help_flag], timeout=300)

    source = (importlib.util.find_spec(entry[1]).origin
              if isinstance(entry, tuple) else os.path.join(ROOT, entry))
    with open(source) as f:  # each program's help asked for once
        argparse_help = "argparse.ArgumentParser" in f.read()
    if argparse_help:
        result = run("--help")
        assert result.returncode == 0, (entry, result.stderr[-2000:])
    else:
        result = run("--helpfull")  # absl prints it and exits 1
        assert "--[no]helpfull" in result.stdout, (entry,
                                                   result.stderr[-2000:])
    flags = {}
    for match in re.finditer(r"^\s+(?:-\S+,)?--(\[no\])?([\w-]+)",
                             result.stdout, re.M):
        flags[match.group(2)] = bool(match.group(1))
    return flags


def test_the_docs_show_commands():
    commands = _all_commands()
    assert len(commands) > 30
    assert {"README.md"} < {where.split(":")[0] for where, _ in commands}


def test_every_command_names_an_entry_point_and_its_flags():
    makefile = open(os.path.join(ROOT, "Makefile")).read()
    targets = set(re.findall(r"^([\w.-]+):", makefile, re.M))
    variables = set(re.findall(r"^(\w+) \?=", makefile, re.M))
    extras = configparser.ConfigParser()
    extras.read(os.path.join(ROOT, "setup.cfg"))
    extras = set(extras["options.extras_require"])
    problems, checked = [], []
    for where, argv in _all_commands():
        entry, arguments = _entry_point(argv)
        if entry == "make":
            for word in arguments:
                name = word.split("=")[0]
                if not (name in variables if "=" in word
                        else name in targets):
                    problems.append(f"{where}: make has no {word}")
            continue
        if entry == "pip":
            for word in arguments:
                for extra in re.findall(r"\[([\w,]+)\]", word):
                    problems += [f"{where}: no extra '{e}' in setup.cfg"
                                 for e in extra.split(",")
                                 if e not in extras]
            continue
        if entry in OTHER_PROGRAMS:
            continue
        if not isinstance(entry, tuple):
            if not os.path.isfile(os.path.join(ROOT, entry)):
                problems.append(f"{where}: no entry point {entry}")
                continue
        elif not entry[1].startswith("cosine_metric_learning") or \
                importlib.util.find_spec(entry[1]) is None:
            problems.append(f"{where}: not a module of the project: {entry}")
            continue
        if any(word.startswith("--") for word in arguments):
            checked.append((where, argv, entry, arguments))
    # each entry point's help once, a few at a time
    entries = list(dict.fromkeys(entry for _, _, entry, _ in checked))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        flags_of = dict(zip(entries, pool.map(_defined_flags, entries)))
    for where, argv, entry, arguments in checked:
        defined = flags_of[entry]
        for word in arguments:
            if not word.startswith("--") or word == "--":
                continue
            name = word[2:].split("=")[0]
            boolean = name.startswith("no") and defined.get(name[2:])
            if name not in defined and not boolean:
                problems.append(f"{where}: {' '.join(argv[:3])} has no "
                                f"--{name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCS, ids=os.path.basename)
def test_python_examples_compile_and_name_what_exists(path):
    for language, line, text in _blocks(path):
        if language != "python":
            continue
        tree = ast.parse(text, f"{path}:{line}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module.startswith(
                    "cosine_metric_learning"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name) or \
                        importlib.util.find_spec(
                            f"{node.module}.{alias.name}"), \
                        (f"{path}:{line}", node.module, alias.name)


def _anchor(heading):
    """A heading's anchor as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    text = re.sub(r"^ *```.*?^ *```", "", open(path).read(),
                  flags=re.M | re.S)
    return {_anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_every_link_between_the_pages_reaches_its_file_and_heading():
    problems = []
    for path in DOCS:
        text = re.sub(r"^ *```.*?^ *```", "", open(path).read(),
                      flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+:", target):
                continue  # another site
            file, _, anchor = target.partition("#")
            linked = os.path.normpath(os.path.join(os.path.dirname(path),
                                                   file)) if file else path
            if not os.path.exists(linked):
                problems.append(f"{path}: no file {target}")
            elif anchor and anchor not in _anchors(linked):
                problems.append(f"{path}: no heading #{anchor} in {file}")
    assert not problems, "\n".join(problems)


def test_the_flag_table_lists_every_setting_and_no_other():
    """docs/training.md's table of the entry points' flags against the
    settings classes the flags are made from (and --mode)."""
    import dataclasses
    from cosine_metric_learning import cli
    with open(os.path.join(ROOT, "docs", "training.md")) as f:
        section = f.read().split("\n## Flags\n")[1].split("\n## ")[0]
    listed = set()
    for line in section.splitlines():
        if line.startswith("| `--"):
            listed |= set(re.findall(r"--(?:\[no\])?(\w+)",
                                     line.split("|")[1]))
    defined = {"mode"} | {field.name for config in set(cli.CONFIGS.values())
                          for field in dataclasses.fields(config)}
    assert listed == defined, (sorted(defined - listed),
                               sorted(listed - defined))
