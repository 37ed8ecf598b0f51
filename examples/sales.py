# A data-analysis step, as an agent writes one: pandas reads a CSV it was given, matplotlib draws
# a chart. Run with:
#   hlctl exec --input examples/sales.csv --output-dir out examples/sales.py
# The figure comes back as an image (saved as out/display-1.png), the summary CSV as a file.
import matplotlib.pyplot as plt
import pandas as pd

sales = pd.read_csv("sales.csv", parse_dates=["day"])
by_city = sales.groupby("city")["amount"].agg(["sum", "mean", "count"]).sort_values("sum")
by_city.to_csv("summary.csv")
print(f"{len(sales)} sales in {sales['city'].nunique()} cities, total {sales['amount'].sum():.2f}")

by_city["sum"].plot.barh(title="Sales by city")
plt.xlabel("amount")
plt.show()

# The last expression, a table, comes back as display data (HTML and text).
by_city
