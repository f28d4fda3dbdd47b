"""`castfind where`: where a name is really defined, the hops to it, its call sites.
"""
