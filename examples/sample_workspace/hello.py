import sys
print("hello from kimik3")
