"""What the training loop checks between steps: a stop signal (Ctrl-C,
SIGTERM) turned into a request, and actions due on intervals."""

import signal
import threading

from absl import logging


class StopSignal:
    """Turns SIGINT/SIGTERM into a stop request checked between steps."""

    def __init__(self):
        self.received = None
        self._previous = {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
            logging.warning("Received %s: stopping after this step and "
                            "saving a checkpoint (send it again to abort "
                            "without saving)", signal.Signals(signum).name)
        else:
            raise KeyboardInterrupt

    def __exit__(self, *exc_info):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        return False


class Periodic:
    """An action due every ``interval`` seconds since it last ran."""

    def __init__(self, interval, now):
        self.interval, self.last = interval, now

    def due(self, now, force=False):
        return force or now - self.last >= self.interval

    def ran(self, now):
        self.last = now
