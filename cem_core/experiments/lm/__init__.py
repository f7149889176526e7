"""Mini language-model runs on SlimPajama: data sources, packing and tokenizers (docs/design.md#51-data-sources)."""
from .data_config import DataConfig, DataStats
from .hub import stream_hub_documents
from .packing import batches, pack_blocks, validation_blocks
from .sources import describe, iter_documents
from .stdlib_corpus import DEMO_LABEL
from .tokenizer import BPETokenizer, ByteTokenizer, Tokenizer, load_tokenizer, train_bpe
from .trained import load_lm_model as load_trained  # (model, tokenizer) of a trained model in models/

__all__ = ["DEMO_LABEL", "DataConfig", "DataStats", "batches", "describe", "iter_documents", "pack_blocks",
           "stream_hub_documents", "validation_blocks",
           "BPETokenizer", "ByteTokenizer", "Tokenizer", "load_tokenizer", "train_bpe", "load_trained"]
