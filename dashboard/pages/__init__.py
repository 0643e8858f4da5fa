"""Pages of the dashboard assembled as plain values, apart from the views that draw them."""
