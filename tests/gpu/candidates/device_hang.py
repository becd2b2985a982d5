"""GPU candidate for problems/gpu/level1/1_GELU.py: a Triton kernel that
never finishes (it spins on a flag nobody sets, with an atomic in the loop
so the compiler cannot drop it), which hangs the candidate's context on the
device. Expected: verdict timeout from the worker's clock (the judge waits
on the candidate), the pair killed, the device probed healthy, and the next
task passes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, count_ptr):
    while tl.load(flag_ptr, volatile=True) == 0:
        tl.atomic_add(count_ptr, 1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        count = torch.zeros(1, dtype=torch.int32, device=x.device)
        spin_kernel[(1,)](flag, count)
        torch.cuda.synchronize()
        return torch.nn.functional.gelu(x)
