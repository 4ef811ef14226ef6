"""Runs a script in a process that may write no file larger than
FILE_SIZE_LIMIT bytes, as a nearly full disk would allow: `small_disk.py
SCRIPT ARGS...`. A write past the limit fails with an OSError (EFBIG), the
same way a write to a full disk fails with ENOSPC."""

import os
import resource
import runpy
import signal
import sys

limit = int(os.environ["FILE_SIZE_LIMIT"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a killed process
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
