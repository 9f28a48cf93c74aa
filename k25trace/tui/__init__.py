"""``k25trace tui``: a Textual front end over :mod:`k25trace.browse` (captures → steps → kernels, ad-hoc SQL)."""
