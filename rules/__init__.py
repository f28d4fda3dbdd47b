"""The default castfind rule files (YAML). Shipped as package data so any install finds them."""
