"""The repository as the scripts of bench/ see it, whatever the working
directory: ROOT, and default_model(), the Makefile's MODEL (the one place
the default model's path is written) as an absolute path."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_model():
    with open(os.path.join(ROOT, "Makefile")) as f:
        for line in f:
            m = re.match(r"MODEL\s*[?:]?=\s*(\S+)\s*$", line)
            if m:
                return os.path.join(ROOT, m.group(1))
    raise RuntimeError("the Makefile sets no MODEL")
