"""Hugging Face checkpoints in posjax's own transformer, read with NumPy (no PyTorch).

    model = posjax.pretrained.load("DIR")          # a local snapshot directory
    model.tokenizer.encode("some text").ids        # tokenizers.Tokenizer from tokenizer.json
    model.logits(token_ids)                        # int32[B, L] -> float32[B, L, vocab]

Families (config.json's model_type): llama (2 and 3, rope_scaling llama3 too), mistral, qwen2,
qwen3, smollm3 (its NoPE layers), phi3 (Phi-3, Phi-4-mini), gemma3_text (Gemma 3, and the
text model of its multimodal gemma3 snapshots), cohere (Command R) and cohere2 (Command R7B,
Command A: NoPE on its full-attention layers), exaone4 (EXAONE 4.0, likewise), olmo2, olmo3
(OLMo 3: its scaling on the full-attention layers alone), glm4 (GLM-4 0414: half of each
head rotating in interleaved pairs), ministral3 (its query temperature by position),
gpt_neox (Pythia). The weights
fill posjax's CausalLM (posjax.models) whose blocks are options any model can use; positions
go through posjax's `rope` encoding with Hugging Face's conventions and the checkpoint's
rope_scaling block (posjax.encoders.scaling reads it), so every frequency map posjax has
applies to a pretrained model as to one trained from scratch. The files are read as they lie
(`hf download NAME --local-dir DIR` writes them); nothing is downloaded.
"""

from posjax.pretrained.families import FAMILIES, Family, register
from posjax.pretrained.loader import Pretrained, load
from posjax.registry import import_package_modules

import_package_modules(__name__, __path__)  # a family module registers itself on import

__all__ = ["FAMILIES", "Family", "Pretrained", "load", "register"]
