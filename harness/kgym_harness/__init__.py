"""kgym_harness: evaluates one kernel-generation task next to PyTorch.

Two roles run in two processes joined by a stream socket:

* the judge (trusted, kgym_harness.judge.run_judge) holds the secret input
  seed, the reference model and the expected outputs, times the reference and
  writes the one framed result;
* the candidate (untrusted, kgym_harness.candidate.run_candidate) imports the
  generated kernel and answers the judge's commands: load, run, time, profile.

kgym_harness.launcher.evaluate runs both as plain subprocesses; the C worker
forks them from a warm zygote instead. See docs/harness.md.
"""

__version__ = "0.1.0"
KGYM_VERSION = __version__
