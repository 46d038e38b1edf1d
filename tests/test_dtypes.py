"""Half-precision models: kvlib in bf16/fp16 is as close to transformers in that dtype as transformers'
own rounding allows, picks the same tokens as fp32, and its cache takes half the bytes."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import kvlib
from kvlib.lessons import memory
from kvlib.model import models

from bounds import hf_logits, logit_bound
from conftest import hf_model
from test_parity import TEXT

# the bound is relative to transformers' own error in that dtype (its half-precision logits against
# its fp32 ones): kvlib may round differently, but not by more than twice what rounding costs anyway,
# plus the drift float32 sums in another order have already
SLACK = 2.0


def hf(path, dtype):
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=dtype).eval()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_half_precision_parity(name, dtype, request):
    path = models.TINY_DIR if name == "tiny" else models.local_dir(name)
    request.getfixturevalue(name)  # SmolLM2 present (fetched by make test)
    model = kvlib.load_model(name, device="cpu", dtype=dtype)
    assert model.dtype == getattr(torch, dtype) and dtype in repr(model)
    ids = model.encode(TEXT)
    ours, theirs = model.forward(ids).float(), hf_logits(hf(path, getattr(torch, dtype)), ids).float()
    reference = hf_logits(hf_model(request, name), ids)  # transformers in fp32: the session's model
    rounding = (theirs - reference).abs().max().item()
    bound = SLACK * rounding + logit_bound(model, reference)
    assert (ours - theirs).abs().max() <= bound and (ours - reference).abs().max() <= bound
    assert (ours.argmax(-1) == reference.argmax(-1)).float().mean() >= 0.9


def test_half_precision_cache_takes_half_the_bytes(tiny):
    model = kvlib.load_model("tiny", device="cpu", dtype="bfloat16")
    cache = model.new_cache()
    model.forward(model.encode(TEXT), cache=cache)
    assert cache.layers[0].keys.dtype == torch.bfloat16
    assert cache.nbytes == len(cache) * memory.model_kv_bytes_per_token(model.config, bytes_per_number=2)
    a = kvlib.generate(model, "ROMEO.\n", 12, use_cache=True, stop_at_eos=False)
    b = kvlib.generate(model, "ROMEO.\n", 12, use_cache=False, stop_at_eos=False)
    assert a.ids == b.ids


def test_unknown_dtype_names_the_choices():
    with pytest.raises(kvlib.KVLibError, match="float32, bfloat16, float16"):
        kvlib.load_model("tiny", dtype="int3")
