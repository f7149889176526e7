"""Mini language-model runs on SlimPajama: data sources, packing and tokenizers (docs/design.md#51-data-sources)."""
from .data import (
                   DEMO_LABEL,
                   DataConfig,
                   DataStats,
                   batches,
                   describe,
                   iter_documents,
                   pack_blocks,
                   stream_hub_documents,
                   validation_blocks,
)
from .tokenizer import BPETokenizer, ByteTokenizer, Tokenizer, load_tokenizer, train_bpe
from .trained import load_lm_model as load_trained  # (model, tokenizer) of a trained model in models/

__all__ = ["DEMO_LABEL", "DataConfig", "DataStats", "batches", "describe", "iter_documents", "pack_blocks",
           "stream_hub_documents", "validation_blocks",
           "BPETokenizer", "ByteTokenizer", "Tokenizer", "load_tokenizer", "train_bpe", "load_trained"]
