"""Typed models of every resource fleet reads or writes, and the CRDs generated from them."""
