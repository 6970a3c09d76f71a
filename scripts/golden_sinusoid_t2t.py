"""Golden values for tensor2tensor's sinusoid (posjax's `spacing="t2t"`), from a NumPy
transcription of its code, run once:

    python scripts/golden_sinusoid_t2t.py > tests/golden/sinusoid_t2t.json

The transcription is tensor2tensor/layers/common_attention.py `get_timing_signal_1d`
(min_timescale=1.0, max_timescale=1.0e4) line for line, in float64 and without TensorFlow,
evaluated at given positions instead of range(length); it shares no code with posjax.
"""

import json
import math

import numpy as np

DIMS, POSITIONS = (16, 6), [0, 1, 2, 3, 7, 31, 100, 1000, 4095]


def get_timing_signal_1d(position, channels, min_timescale=1.0, max_timescale=1.0e4):
    num_timescales = channels // 2
    log_timescale_increment = (
        math.log(float(max_timescale) / float(min_timescale))
        / max(float(num_timescales) - 1, 1))
    inv_timescales = min_timescale * np.exp(
        np.arange(num_timescales, dtype=np.float64) * -log_timescale_increment)
    scaled_time = np.expand_dims(position, 1) * np.expand_dims(inv_timescales, 0)
    signal = np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)
    return np.pad(signal, [[0, 0], [0, channels % 2]])


print(json.dumps({
    "source": "NumPy transcription of tensor2tensor's get_timing_signal_1d "
              "(common_attention.py); run by scripts/golden_sinusoid_t2t.py",
    "positions": POSITIONS,
    "tables": {str(dim): get_timing_signal_1d(np.asarray(POSITIONS, np.float64), dim).tolist()
               for dim in DIMS},
}, indent=1))
