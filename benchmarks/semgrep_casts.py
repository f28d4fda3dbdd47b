# Examples for semgrep_casts.yaml: `semgrep --test benchmarks/` checks that exactly the
# lines marked with the rule id match. Never imported.
import torch

x = torch.zeros(4)

# ruleid: plain-dtype-cast
y = x.to(torch.bfloat16)
# ruleid: plain-dtype-cast
y = x.float()
# ruleid: plain-dtype-cast
y = x.half()
# ruleid: plain-dtype-cast
y = x.bfloat16()
# ruleid: plain-dtype-cast
y = x.double()
# ruleid: plain-dtype-cast
y = x.type(torch.float16)
# ruleid: plain-dtype-cast
y.copy_(x)
# ok: plain-dtype-cast
y = x.clone()
# ok: plain-dtype-cast
y = float(x.sum())
# ok: plain-dtype-cast
y = torch.float32
