"""Configs: every default with its description (fields.py), the arg parser of config files
(args.py), the sections every config has (base.py), loading a config file with its overrides
(files.py), and an old run's config.json (saved.py). Config files import it as
`from posjax import config as configlib`."""

from posjax.config.args import (
    PathText,
    arg_keys,
    check_each_once,
    dataset_fields,
    encoding_config,
    encoding_entry,
    parse_arg,
    scaling_text,
    set_fields,
    with_defaults,
)
from posjax.config.base import (
    MODEL_SIZE_KEYS,
    SMOKE_SIZE,
    add_evals,
    apply_size,
    base_config,
    check_one_size,
    check_size,
    check_sweep_encodings,
    doubling_lengths,
    schedule_fields,
    size_budget,
    step_schedule,
)
from posjax.config.fields import (
    EVAL_DEFAULTS,
    EVAL_FIELDS,
    MODEL_DEFAULTS,
    MODEL_FIELDS,
    MODEL_PLACEHOLDERS,
    TRAIN_DEFAULTS,
    TRAIN_FIELDS,
    Field,
)
from posjax.config.files import (
    check_syntax,
    configured,
    load_config_module,
    load_user_module,
    overridden,
    override_target,
    shown,
)
from posjax.config.saved import (
    changes_text,
    check_same_tokenizer,
    config_changes,
    config_json,
    load_config,
    read_config_json,
    tokenizer_record,
)
from posjax.errors import unknown  # config files raise configlib.unknown(...)

__all__ = [
    "EVAL_DEFAULTS", "EVAL_FIELDS", "Field", "MODEL_DEFAULTS", "MODEL_FIELDS",
    "MODEL_PLACEHOLDERS", "MODEL_SIZE_KEYS", "PathText", "SMOKE_SIZE", "TRAIN_DEFAULTS",
    "TRAIN_FIELDS",
    "add_evals", "apply_size", "arg_keys", "base_config", "changes_text", "check_each_once",
    "check_one_size",
    "check_same_tokenizer", "tokenizer_record",
    "check_size", "check_sweep_encodings", "check_syntax", "config_changes", "config_json",
    "configured",
    "dataset_fields", "doubling_lengths", "encoding_config", "encoding_entry",
    "load_config", "load_config_module", "load_user_module", "override_target", "overridden",
    "parse_arg",
    "read_config_json", "scaling_text", "schedule_fields", "set_fields", "shown", "size_budget",
    "step_schedule",
    "unknown", "with_defaults",
]
