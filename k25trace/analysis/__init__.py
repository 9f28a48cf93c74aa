"""Analysis: read a loaded database and return polars frames or typed results; nothing here prints or formats."""
