"""elsi: which hidden layers of a target LLM should a speculative-decoding draft see?

Implements "Surfing the Activation Wave" (arXiv 2610.12939). Data flows one way, a folder per stage:
`inputs` (models, prompt sets, chat formatting) -> `hidden` (replies, forward, capture -> `LayerStats`
of layer representatives Z (N, B, d)) -> `selection` (entropy, CKA, ELSI / ELSI-C; pure functions of
arrays that never touch a model) -> `paper` (the study's figures and tables) and `draft` (drafts on a
chosen set: training, replay, decoding, tables, export to engines); `common` holds cache files,
identity and progress bars. torch and transformers are imported only by the code that needs them.
This module gathers the public names; every other name lives in one module.
"""

from .hidden.accumulate import select_positions
from .hidden.capture import capture, capture_variants
from .hidden.forward import token_entropy
from .hidden.layerstats import CacheError, LayerStats
from .hidden.replies import generate_responses, reply_conversations, with_replies
from .hidden.settings import CaptureSettings
from .inputs.models import DEFAULT_MODEL, REGISTRY, load_model, random_model
from .inputs.weights import ModelFileError, ModelNotFoundError
from .inputs.prompts import (
    CALIBRATION_MIX,
    PROMPT_SETS,
    TRAINING_MIX,
    OverlapError,
    calibration_prompts,
    check_disjoint,
    load_prompts,
    load_specbench,
    sample,
    specbench_conversations,
)
from .inputs.readers import DataFormatError, DataIntegrityError
from .selection.cka import (
    centered_gram_products,
    cka_matrix,
    conditional_cka_matrices,
    conditional_cka_matrix,
    find_boundaries,
    linear_cka,
    transition_scores,
)
from .selection.conventions import convert_layer_ids, eagle2_layers, eagle3_layers, eagle3_paper_layers
from .selection.entropy import gram_entropy, layer_grams, matrix_entropy, set_entropy
from .selection.select import (
    BeamEntry,
    Selection,
    conditional_transition_scores,
    elsi,
    elsi_c,
    exhaustive,
    lowest_entropy_layers,
    single_layer_entropies,
)

from .common.version import __version__
