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


@dataclass
class Coupon:
    code: str
    percent_off: float
    min_total_cents: int = 0


class Cart:
    def __init__(self) -> None:
        self._items: dict[str, LineItem] = {}
        self._coupon: Coupon | None = None

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

    def apply_coupon(self, coupon: Coupon) -> None:
        self._coupon = coupon

    def average_item_price_cents(self) -> int:
        count = sum(item.quantity for item in self._items.values())
        return self.subtotal_cents() // count

    def subtotal_cents(self) -> int:
        return sum(item.subtotal_cents() for item in self._items.values())

    def total_cents(self) -> int:
        subtotal = self.subtotal_cents()
        if self._coupon and subtotal > self._coupon.min_total_cents:
            discount = subtotal * self._coupon.percent_off / 100
            return int(subtotal - discount)
        return subtotal
