import sys

def encode(text, tokenizer):
    return tokenizer.encode(text)
