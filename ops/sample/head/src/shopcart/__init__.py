"""A small shopping-cart library."""

from .cart import Cart, CartError, LineItem

__all__ = ["Cart", "CartError", "LineItem"]
