# A small report, as an agent might write one. Run with: hlctl exec examples/report.py
import csv, io, statistics
from collections import Counter
from datetime import datetime
from zoneinfo import ZoneInfo

data = io.StringIO("""city,day,temp
Oslo,2026-01-05,-3.5
Lima,2026-01-05,24.1
Oslo,2026-01-06,-1.0
Lima,2026-01-06,25.3
""")
rows = list(csv.DictReader(data))
by_city = {}
for row in rows:
    by_city.setdefault(row["city"], []).append(float(row["temp"]))
for city, temps in sorted(by_city.items()):
    print(f"{city}: mean {statistics.mean(temps):.1f} C over {len(temps)} days")
noon_utc = datetime(2026, 1, 5, 12, tzinfo=ZoneInfo("UTC"))
print("noon UTC in Lima:", noon_utc.astimezone(ZoneInfo("America/Lima")).strftime("%H:%M"))
# The last expression is the program's result.
{"rows": len(rows), "cities": Counter(r["city"] for r in rows)}
