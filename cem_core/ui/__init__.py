"""What the app, the notebooks and the figures show: validated controls, figure data, plot
builders (matplotlib and Plotly), the LaTeX of the update, and the app's job supervisor. Built on
`cem_core.nn` and `cem_core.experiments`; never imports Streamlit."""
