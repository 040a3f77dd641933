"""The vocabulary every layer shares, importing nothing else of dlbench: a cell, a measuring
process's job, numeric precisions, errors, SIGTERM as Ctrl-C, and the plain data of tables and plots.
"""
