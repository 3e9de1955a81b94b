import os

# Triton kernels run on the CPU through the interpreter in tests (CI has no GPU).
os.environ.setdefault("TRITON_INTERPRET", "1")
