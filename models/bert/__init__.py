"""BERT family encoders (BERT, RoBERTa, DistilBERT) and sentence-transformers embeddings (SentenceEncoder)."""
