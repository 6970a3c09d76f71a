"""Issue 40's encodings (SSMax, VO-RoPE, stick-breaking, DAPE, M-RoPE) and PoSE end to end:
`posjax train` with configs/lm.py on a tiny config, and bfloat16 activations next to float32.
Each one's defining property and goldens: tests/test_encoders_<module>.py, tests/test_pose.py."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posjax import encoders, fileio
from posjax.launch import cli
from posjax.models import build_model

LM = str(Path(__file__).resolve().parents[1] / "configs" / "lm.py")
NAMES = ("ssmax", "vo_rope", "qkvo_rope", "stickbreaking", "dape", "mrope")
TINY = "smoke,seq_len=32,batch_size=4,steps=3"


@pytest.mark.slow
@pytest.mark.parametrize("arg", [f"encoding={n}" for n in NAMES] + ["encoding=rope,pose=512"])
def test_posjax_train_runs_each_with_configs_lm(tmp_path, data_flags, arg):
    workdir = tmp_path / "run"
    argv = ["train", f"--config={LM}:{TINY},{arg}", f"--workdir={workdir}", "--noprogress",
            "--config.train.log_every_steps=1", *data_flags]
    assert cli.main(argv) == 0
    rows = fileio.read_jsonl(workdir / "metrics.jsonl")
    assert rows and all(np.isfinite(r["loss"]) for r in rows if "loss" in r)


@pytest.mark.parametrize("name", NAMES)
def test_bfloat16_activations_stay_close_to_float32(name):
    cfg = dict(d_model=32, num_layers=1, num_heads=2, head_dim=16, mlp_dim=64)
    tokens = jax.random.randint(jax.random.key(0), (2, 24), 0, 64)
    positions = jnp.broadcast_to(jnp.arange(24, dtype=jnp.int32), (2, 24))
    segments = jnp.ones((2, 24), jnp.int32)

    def logits(dtype):
        model = build_model(dict(cfg, dtype=dtype), encoders.get(name).for_model(True),
                            kind="causal_lm", vocab_size=64, num_classes=1, patch_dim=1,
                            max_len=64, rngs=nnx.Rngs(0))
        return np.asarray(model(tokens, positions, segments))

    low, full = logits("bfloat16"), logits("float32")
    assert low.dtype == np.float32 and np.isfinite(low).all()
    np.testing.assert_allclose(low, full, atol=0.1)
