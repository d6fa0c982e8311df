"""Shopping cart with line items; all money is integer cents."""

from dataclasses import dataclass


class CartError(ValueError):
    """Raised when a cart operation is invalid."""


@dataclass
class LineItem:
    sku: str
    unit_price_cents: int
    quantity: int

    def subtotal_cents(self) -> int:
        return self.unit_price_cents * self.quantity


class Cart:
    def __init__(self) -> None:
        self._items: dict[str, LineItem] = {}

    def add(self, sku: str, unit_price_cents: int, quantity: int = 1) -> None:
        if quantity <= 0:
            raise CartError(f"quantity must be positive, got {quantity}")
        if unit_price_cents < 0:
            raise CartError(f"price must not be negative, got {unit_price_cents}")
        item = self._items.get(sku)
        if item is None:
            self._items[sku] = LineItem(sku, unit_price_cents, quantity)
        else:
            item.quantity += quantity

    def remove(self, sku: str, quantity: int = 1) -> None:
        item = self._items.get(sku)
        if item is None:
            raise CartError(f"{sku} is not in the cart")
        if quantity >= item.quantity:
            del self._items[sku]
        else:
            item.quantity -= quantity

    def items(self) -> list[LineItem]:
        return list(self._items.values())

    def total_cents(self) -> int:
        return sum(item.subtotal_cents() for item in self._items.values())
