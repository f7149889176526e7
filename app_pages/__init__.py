"""Streamlit pages of the CEM Lab app (one module per page); shared helpers in common.py."""
