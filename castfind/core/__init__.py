"""What every wing shares: the records findings and diagnostics are made of, the cast table, source text, rule
files, configuration, paths as shown, input and output files, versions.
"""
