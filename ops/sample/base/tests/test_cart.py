import pytest

from shopcart import Cart, CartError


def test_total_sums_line_items():
    cart = Cart()
    cart.add("A", 1299, 2)
    cart.add("B", 500)
    assert cart.total_cents() == 3098


def test_adding_twice_increases_quantity():
    cart = Cart()
    cart.add("A", 100)
    cart.add("A", 100, 2)
    assert cart.items()[0].quantity == 3


def test_remove_all_deletes_the_line():
    cart = Cart()
    cart.add("A", 100, 2)
    cart.remove("A", 5)
    assert cart.items() == []


def test_rejects_non_positive_quantity():
    with pytest.raises(CartError):
        Cart().add("A", 100, 0)
