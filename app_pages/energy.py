import streamlit as st
st.title("Energy descent")
