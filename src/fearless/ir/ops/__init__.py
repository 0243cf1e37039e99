"""Op definitions, one module per op set. Each module also offers small typed builder helpers."""
