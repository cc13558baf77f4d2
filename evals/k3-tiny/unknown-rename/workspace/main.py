from billing import compute_total

print(compute_total([1, 2, 3]))
