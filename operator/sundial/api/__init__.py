"""The API: the pydantic models every CRD is generated from (crdgen.py)."""
