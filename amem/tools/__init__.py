"""amem's tools, declared once (``table``) and kept lean for the model (``lean``)."""
