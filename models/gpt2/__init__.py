"""GPT-2 and GPTBigCode (StarCoder 1) causal LMs."""
