"""Mixtral (sparse mixture of experts, top-2 of 8) on the llama layout."""
