"""Whisper (openai/whisper, MIT): audio front end, CTranslate2 weight conversion."""
