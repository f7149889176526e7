"""Mini language model: a placeholder until the mini SlimPajama feature lands."""
import streamlit as st

st.title("Mini language model (coming next)")
st.markdown("""
This page will run the paper's main comparison in miniature: **Llama vs CEM** language models trained on
SlimPajama (or, offline, on a clearly labelled demo corpus that is *not* SlimPajama), side by side:

- validation loss and perplexity curves for llama, cem-attn, cem-mlp and cem-full at equal width and depth;
- parameters of each (tied CEM attention uses half of Llama's attention weights, the CEM MLP two thirds);
- T = 1 vs T = 2, which the paper reports helps both CEM attention and the CEM MLP;
- tokens per second and, on a GPU, model-FLOPs utilisation.

Until then, the command line already shows the parameter side of the story:
`python -m cem_core info --d-model 768 --n-layers 12 --n-heads 12 --d-ff 2048`.
""")
