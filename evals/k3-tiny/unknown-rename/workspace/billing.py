def compute_total(items):
    return sum(items)
