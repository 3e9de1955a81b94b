"""Probe (not a suite): dump what torch._cslt_compress writes for 2:4 operands whose kept values
encode their own row or column, so that cuSPARSELt's compressed layout (value order and metadata
bits) can be read offline and reproduced by a Triton packer. Also dumps the fused tile op's
packing of the same operand. Writes $OUT/cslt_layout.pt (int16 views; small shapes)."""

from __future__ import annotations

import os

import torch

dev = torch.device("cuda")
torch.manual_seed(0)
OFFSET = 0x1000  # normal in fp16 and bf16; codes stay below Inf/NaN for indices < 24576


def random_24_mask(m: int, k: int, gen: torch.Generator) -> torch.Tensor:
    scores = torch.rand(m, k // 4, 4, generator=gen)
    idx = scores.topk(2, dim=-1).indices
    mask = torch.zeros(m, k // 4, 4, dtype=torch.bool)
    mask.scatter_(-1, idx, True)
    return mask.reshape(m, k)


cases = []
gen = torch.Generator().manual_seed(0)
shapes = [(32, 64), (64, 64), (64, 128), (128, 128), (128, 256), (256, 128), (32, 1024), (1024, 64), (256, 512)]
for dtype in (torch.bfloat16, torch.float16):
    for m, k in shapes:
        rows = torch.arange(m).view(m, 1).expand(m, k)
        cols = torch.arange(k).view(1, k).expand(m, k)
        for rep in range(6 if dtype == torch.bfloat16 else 2):
            mask = random_24_mask(m, k, gen)
            for code_name, code in (("row", rows), ("col", cols)):
                if rep >= 2 and code_name == "col":
                    continue  # metadata-only repeats
                bits = torch.where(mask, (OFFSET + code).to(torch.int16), torch.zeros((), dtype=torch.int16))
                dense = bits.view(dtype).to(dev)
                try:
                    comp = torch._cslt_compress(dense)
                    out = comp.contiguous().view(torch.int16).cpu()
                    shape = tuple(comp.shape)
                except Exception as e:  # noqa: BLE001 (a probe: record and go on)
                    out, shape = None, f"failed: {type(e).__name__}: {e}"[:200]
                tile = None
                if rep == 0:
                    try:
                        packed, meta, packed_t, meta_t, bitmask = torch._sparse_semi_structured_tile(dense, "", False)
                        tile = {"packed": packed.view(torch.int16).cpu(), "packed_t": packed_t.view(torch.int16).cpu()}
                    except Exception as e:  # noqa: BLE001
                        tile = f"failed: {type(e).__name__}: {e}"[:200]
                cases.append(
                    {
                        "dtype": str(dtype),
                        "m": m,
                        "k": k,
                        "rep": rep,
                        "code": code_name,
                        "mask": mask,
                        "compressed_bits": out,
                        "compressed_shape": shape,
                        "tile": tile,
                    }
                )
                print(dtype, m, k, rep, code_name, shape, flush=True)

# a GEMM check through our own reading is done offline; record versions
info = {
    "torch": torch.__version__,
    "cusparselt": getattr(torch.backends.cusparselt, "version", lambda: None)(),
    "gpu": torch.cuda.get_device_name(),
}
print(info)
torch.save({"cases": cases, "info": info, "offset": OFFSET}, os.path.join(os.environ.get("OUT", "."), "cslt_layout.pt"))
