"""The math task's shipped data, written for this project: `python tests/math_fixtures.py`.

Writes `src/mathrl/tasks/math/data/`:

- `gsm-train.jsonl` (200) and `gsm-test.jsonl` (50): word problems in GSM8K's
  format (`{"question", "answer"}`, the answer's reasoning with calculator
  annotations `<<6*4=24>>` and a last line `#### 24`; answers of 1,000 or
  more written with commas), from the templates below, seeded;
- `equivalence.jsonl` (32): problems in MATH's format (`{"problem",
  "solution"}`, the answer in the solution's last `\\boxed{}`) whose answers
  need a real equivalence check: fractions against decimals, roots, pi,
  intervals, sets, units. Each row also has `equivalent`, the same answer
  written another way, and `different`, a close answer that is wrong; the
  grader's tests read them.

`test_math_task.py` checks the committed files are what this script writes.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "src" / "mathrl" / "tasks" / "math" / "data"
SEED = "mathrl/math-fixtures/1"
TRAIN, TEST = 200, 50

NAMES = (
    ("Ava", "she"), ("Ben", "he"), ("Chloe", "she"), ("Dev", "he"), ("Elena", "she"),
    ("Farid", "he"), ("Grace", "she"), ("Hiro", "he"), ("Ines", "she"), ("Jonah", "he"),
    ("Kira", "she"), ("Luis", "he"), ("Maya", "she"), ("Nils", "he"), ("Olga", "she"),
    ("Pavel", "he"), ("Rosa", "she"), ("Sami", "he"), ("Tara", "she"), ("Umar", "he"),
)  # fmt: skip
ITEMS = ("pencils", "stickers", "marbles", "cookies", "stamps", "beads", "cards", "shells")


def calc(a: int, sign: str, b: int) -> tuple[int, str]:
    """`a sign b`, its value, and GSM8K's way of writing it: `6*4=<<6*4=24>>24`."""
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[sign]
    assert sign != "/" or a % b == 0, (a, b)
    return value, f"{a}{sign}{b}=<<{a}{sign}{b}={value}>>{value}"


def written(n: int) -> str:
    """A final answer as GSM8K's last line has it: thousands with commas."""
    return f"{n:,}"


Problem = tuple[str, list[str], int]


def packs(rng: random.Random) -> Problem:
    (name, she), item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(2, 9), rng.randint(4, 12)
    c = rng.randint(1, a * b - 1)
    total, t1 = calc(a, "*", b)
    left, t2 = calc(total, "-", c)
    return (
        f"{name} buys {a} packs of {item} with {b} {item} in each pack. {she.capitalize()} "
        f"gives {c} {item} to friends. How many {item} does {name} have left?",
        [f"{name} buys {t1} {item}.", f"After giving some away, {she} has {t2} {item}."],
        left,
    )


def wages(rng: random.Random) -> Problem:
    name, she = rng.choice(NAMES)
    a, b, c = rng.randint(9, 30), rng.randint(3, 9), rng.randint(4, 25)
    daily, t1 = calc(a, "*", b)
    total, t2 = calc(daily, "*", c)
    return (
        f"{name} earns ${a} an hour and works {b} hours a day. How many dollars does "
        f"{she} earn in {c} days?",
        [f"{name} earns {t1} dollars a day.", f"In {c} days {she} earns {t2} dollars."],
        total,
    )


def trip(rng: random.Random) -> Problem:
    a, b, c, d = rng.randint(30, 80), rng.randint(2, 6), rng.randint(20, 70), rng.randint(1, 5)
    first, t1 = calc(a, "*", b)
    second, t2 = calc(c, "*", d)
    total, t3 = calc(first, "+", second)
    return (
        f"A train travels at {a} miles per hour for {b} hours, then at {c} miles per hour "
        f"for {d} hours. How many miles does it travel in all?",
        [f"First it travels {t1} miles.", f"Then it travels {t2} miles.", f"In all, {t3} miles."],
        total,
    )


def ages(rng: random.Random) -> Problem:
    (n1, _), (n2, _) = rng.sample(NAMES, 2)
    a, b, c = rng.randint(3, 15), rng.randint(2, 4), rng.randint(2, 12)
    now, t1 = calc(a, "*", b)
    later, t2 = calc(now, "+", c)
    return (
        f"{n1} is {a} years old. {n2} is {b} times as old as {n1}. How old will {n2} be "
        f"in {c} years?",
        [f"{n2} is {t1} years old now.", f"In {c} years {n2} will be {t2} years old."],
        later,
    )


def sharing(rng: random.Random) -> Problem:
    (name, _), item = rng.choice(NAMES), rng.choice(ITEMS)
    each, friends, more = rng.randint(3, 15), rng.randint(2, 8), rng.randint(1, 9)
    total = each * friends
    share, t1 = calc(total, "/", friends)
    now, t2 = calc(share, "+", more)
    return (
        f"{name} shares {total} {item} equally among {friends} friends. Each friend then "
        f"finds {more} more. How many {item} does each friend have now?",
        [f"Each friend gets {t1} {item}.", f"With the ones found, each has {t2} {item}."],
        now,
    )


def sale(rng: random.Random) -> Problem:
    thing = rng.choice(("jacket", "lamp", "bicycle", "chair", "backpack", "kettle"))
    price, off = 20 * rng.randint(2, 30), rng.choice((10, 20, 25, 50))
    cut = price * off // 100
    now, t2 = calc(price, "-", cut)
    return (
        f"A {thing} costs ${price}. It is on sale for {off}% off. How many dollars does the "
        f"{thing} cost on sale?",
        [f"The discount is {price}*{off}/100=<<{price}*{off}/100={cut}>>{cut} dollars.",
         f"On sale it costs {t2} dollars."],
        now,
    )  # fmt: skip


def garden(rng: random.Random) -> Problem:
    plant = rng.choice(("tomato plants", "rose bushes", "tulips", "pepper plants", "herbs"))
    rows, per, lost = rng.randint(3, 15), rng.randint(5, 20), rng.randint(1, 20)
    total, t1 = calc(rows, "*", per)
    left, t2 = calc(total, "-", lost)
    return (
        f"A garden has {rows} rows of {per} {plant}. A frost kills {lost} of them. How many "
        f"{plant} are left?",
        [f"The garden had {t1} {plant}.", f"After the frost, {t2} are left."],
        left,
    )


def reading(rng: random.Random) -> Problem:
    name, she = rng.choice(NAMES)
    per, days, done = rng.randint(8, 40), rng.randint(4, 20), rng.randint(1, 3)
    pages = per * days
    total_days, t1 = calc(pages, "/", per)
    left, t2 = calc(total_days, "-", done)
    return (
        f"A book has {pages} pages. {name} reads {per} pages a day and has already read for "
        f"{done} days. How many more days does {she} need to finish the book?",
        [f"The book takes {t1} days.", f"{name} needs {t2} more days."],
        left,
    )


def savings(rng: random.Random) -> Problem:
    name, she = rng.choice(NAMES)
    per, weeks = rng.randint(5, 60), rng.randint(4, 30)
    saved, t1 = calc(per, "*", weeks)
    spent = rng.randint(1, saved - 1)
    left, t2 = calc(saved, "-", spent)
    return (
        f"{name} saves ${per} every week for {weeks} weeks, then spends ${spent} on a "
        f"present. How many dollars does {she} have left?",
        [f"{name} saves {t1} dollars.", f"After the present, {she} has {t2} dollars."],
        left,
    )


def fence(rng: random.Random) -> Problem:
    length, width = rng.randint(10, 120), rng.randint(5, 80)
    half, t1 = calc(length, "+", width)
    total, t2 = calc(2, "*", half)
    return (
        f"A rectangular field is {length} meters long and {width} meters wide. How many "
        "meters of fence go around it?",
        [f"Half the perimeter is {t1} meters.", f"The whole fence is {t2} meters."],
        total,
    )


def eggs(rng: random.Random) -> Problem:
    hens, days = rng.randint(5, 40), rng.randint(2, 12)
    while hens * days % 12:
        days += 1
    laid, t1 = calc(hens, "*", days)
    cartons, t2 = calc(laid, "/", 12)
    return (
        f"A farm's hens lay {hens} eggs a day. The farmer packs every egg of {days} days in "
        "cartons of 12. How many cartons does the farmer fill?",
        [f"The hens lay {t1} eggs.", f"They fill {t2} cartons."],
        cartons,
    )


def tickets(rng: random.Random) -> Problem:
    adult, child = rng.randint(8, 30), rng.randint(3, 15)
    adults, children = rng.randint(1, 6), rng.randint(1, 8)
    a, t1 = calc(adults, "*", adult)
    c, t2 = calc(children, "*", child)
    total, t3 = calc(a, "+", c)
    return (
        f"Adult tickets cost ${adult} and child tickets cost ${child}. A group buys {adults} "
        f"adult and {children} child tickets. How many dollars do they pay?",
        [f"Adult tickets cost {t1} dollars.", f"Child tickets cost {t2} dollars.",
         f"Together they pay {t3} dollars."],
        total,
    )  # fmt: skip


def marbles(rng: random.Random) -> Problem:
    (n1, _), (n2, _), (n3, _) = rng.sample(NAMES, 3)
    a, more = rng.randint(5, 40), rng.randint(2, 20)
    second, t1 = calc(a, "+", more)
    third, t2 = calc(2, "*", second)
    pair, t3 = calc(a, "+", second)
    total, t4 = calc(pair, "+", third)
    return (
        f"{n1} has {a} marbles. {n2} has {more} more marbles than {n1}, and {n3} has twice "
        f"as many as {n2}. How many marbles do the three have together?",
        [f"{n2} has {t1} marbles.", f"{n3} has {t2} marbles.",
         f"{n1} and {n2} have {t3}.", f"Together they have {t4} marbles."],
        total,
    )  # fmt: skip


def practice(rng: random.Random) -> Problem:
    name, she = rng.choice(NAMES)
    minutes, days = rng.choice((20, 30, 40, 45, 60, 90)), rng.randint(2, 7)
    weeks = rng.randint(1, 12)
    while minutes * days * weeks % 60:
        weeks += 1
    week, t1 = calc(minutes, "*", days)
    total, t2 = calc(week, "*", weeks)
    hours, t3 = calc(total, "/", 60)
    return (
        f"{name} practices the piano for {minutes} minutes a day, {days} days a week. How "
        f"many hours does {she} practice in {weeks} weeks?",
        [f"Each week {she} practices {t1} minutes.", f"In {weeks} weeks, {t2} minutes.",
         f"That is {t3} hours."],
        hours,
    )  # fmt: skip


TEMPLATES: tuple[Callable[[random.Random], Problem], ...] = (
    packs, wages, trip, ages, sharing, sale, garden, reading, savings, fence, eggs, tickets,
    marbles, practice,
)  # fmt: skip


def word_problems(count: int) -> list[dict[str, str]]:
    """`count` distinct word problems, the templates taken in turn, seeded."""
    rng = random.Random(SEED)
    rows: dict[str, dict[str, str]] = {}
    while len(rows) < count:
        question, steps, answer = TEMPLATES[len(rows) % len(TEMPLATES)](rng)
        solution = "\n".join([*steps, f"#### {written(answer)}"])
        rows.setdefault(question, {"question": question, "answer": solution})
    ordered = list(rows.values())
    rng.shuffle(ordered)
    return ordered


EQUIVALENCE = (
    # (problem, solution's reasoning, answer, equivalent, different)
    ("Write $\\frac{3}{4}$ as a decimal.", "Dividing 3 by 4 gives", "0.75",
     "\\frac{3}{4}", "0.7"),
    ("Simplify $\\sqrt{50}$.", "Since $50 = 25 \\cdot 2$, $\\sqrt{50} = 5\\sqrt{2}$, so",
     "5\\sqrt{2}", "\\sqrt{2} \\cdot 5", "2\\sqrt{5}"),
    ("What is the area of a circle of radius 3?", "The area is $\\pi r^2 = 9\\pi$, so",
     "9\\pi", "\\pi \\cdot 9", "6\\pi"),
    ("Solve $2x - 3 > 5$ and give the solutions as an interval.",
     "Adding 3 and halving gives $x > 4$, so", "(4, \\infty)", "\\left(4, \\infty\\right)",
     "[4, \\infty)"),
    ("Find every solution of $x^2 = 9$.", "Both $3$ and $-3$ square to 9, so",
     "\\{-3, 3\\}", "\\{3, -3\\}", "\\{3\\}"),
    ("Two fair dice are rolled. What is the probability that their sum is 7?",
     "Six of the 36 outcomes sum to 7, so", "\\frac{1}{6}", "1/6", "\\frac{1}{7}"),
    ("How many minutes are in 2.5 hours?", "Each hour is 60 minutes, so",
     "150 \\text{ minutes}", "150", "125"),
    ("A right triangle has legs 1 and 2. How long is its hypotenuse?",
     "By Pythagoras, $1 + 4 = 5$, so", "\\sqrt{5}", "5^{1/2}", "\\sqrt{3}"),
    ("What is the circumference of a circle of diameter 7?", "It is $\\pi d$, so",
     "7\\pi", "\\frac{14\\pi}{2}", "14\\pi"),
    ("Solve $\\frac{x}{3} = 0.4$.", "Multiplying by 3 gives", "1.2", "\\frac{6}{5}", "1.3"),
    ("What percent of 80 is 20?", "Since $20/80 = 1/4$, it is", "25\\%", "25", "20\\%"),
    ("Write $0.125$ as a fraction in lowest terms.", "Since $0.125 = 125/1000$, it is",
     "\\frac{1}{8}", "0.125", "\\frac{1}{4}"),
    ("Solve $|x - 1| \\le 2$ and give the solutions as an interval.",
     "The solutions are $-2 \\le x - 1 \\le 2$, so", "[-1, 3]", "\\left[-1, 3\\right]",
     "(-1, 3)"),
    ("What is the volume of a sphere of radius 3?", "It is $\\frac{4}{3}\\pi r^3$, so",
     "36\\pi", "\\frac{108\\pi}{3}", "27\\pi"),
    ("Compute $\\sqrt{2} \\cdot \\sqrt{8}$.", "It is $\\sqrt{16}$, so", "4", "4.0", "8"),
    ("Simplify $\\frac{x^2 - 1}{x - 1}$ for $x \\ne 1$.",
     "Factoring the top as $(x-1)(x+1)$ gives", "x + 1", "1 + x", "x - 1"),
    ("Expand $(x + 2)^2$.", "Squaring term by term gives", "x^2 + 4x + 4", "4 + 4x + x^2",
     "x^2 + 4"),
    ("What is $\\sin\\frac{\\pi}{6}$?", "The angle is 30 degrees, so", "\\frac{1}{2}", "0.5",
     "\\frac{\\sqrt{3}}{2}"),
    ("What is $\\cos\\frac{\\pi}{6}$?", "The angle is 30 degrees, so", "\\frac{\\sqrt{3}}{2}",
     "\\frac{1}{2}\\sqrt{3}", "\\frac{\\sqrt{2}}{2}"),
    ("What is the domain of $f(x) = \\sqrt{x - 2}$?", "We need $x - 2 \\ge 0$, so",
     "[2, \\infty)", "\\left[2, \\infty\\right)", "(2, \\infty)"),
    ("List the primes below 10 as a set.", "The primes below 10 are 2, 3, 5 and 7, so",
     "\\{2, 3, 5, 7\\}", "\\{7, 5, 3, 2\\}", "\\{1, 2, 3, 5, 7\\}"),
    ("Rationalize $\\frac{1}{\\sqrt{2}}$.", "Multiplying top and bottom by $\\sqrt{2}$ gives",
     "\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "\\sqrt{2}"),
    ("A rectangle is 3 cm by 4 cm. How long is its diagonal?",
     "By Pythagoras, $9 + 16 = 25$, so", "5 \\text{ cm}", "5", "7"),
    ("What is the slope of the line through $(1, 2)$ and $(3, 8)$?",
     "It rises 6 over a run of 2, so", "3", "\\frac{6}{2}", "\\frac{1}{3}"),
    ("Solve $3x + 1 = 2$.", "Subtracting 1 and dividing by 3 gives", "\\frac{1}{3}",
     "x = \\frac{1}{3}", "0.33"),
    ("Compute $2^{10}$.", "Doubling ten times gives", "1024", "1,024", "1000"),
    ("Where do the lines $y = x$ and $y = 2x - 3$ meet?", "Setting $x = 2x - 3$ gives $x = 3$, so",
     "(3, 3)", "\\left(3, 3\\right)", "(3, -3)"),
    ("What is the mean of 1, 2, 3 and 4?", "The sum is 10 over 4 numbers, so", "2.5",
     "\\frac{5}{2}", "2"),
    ("How many degrees is half of a third of 180 degrees?", "A third is 60 degrees, so",
     "30^\\circ", "30", "60^\\circ"),
    ("Solve $x^2 - 5x + 6 = 0$.", "It factors as $(x - 2)(x - 3) = 0$, so", "2, 3", "3, 2",
     "2, -3"),
    ("What is the area of an equilateral triangle with sides of length 2?",
     "The area is $\\frac{\\sqrt{3}}{4} s^2$, so", "\\sqrt{3}", "\\frac{2\\sqrt{3}}{2}",
     "2\\sqrt{3}"),
    ("How many hours are in 3 days?", "Each day has 24 hours, so", "72 \\text{ hours}", "72",
     "36"),
)  # fmt: skip


def equivalence_rows() -> list[dict[str, str]]:
    """The MATH-format rows, each with its answer written another way and a close wrong one."""
    return [
        {
            "problem": problem,
            "solution": f"{reasoning} the answer is $\\boxed{{{answer}}}$.",
            "equivalent": equivalent,
            "different": different,
        }
        for problem, reasoning, answer, equivalent, different in EQUIVALENCE
    ]


def files() -> dict[str, str]:
    """File name -> its content: every file this script writes."""
    problems = word_problems(TRAIN + TEST)
    return {
        name: "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        for name, rows in (
            ("gsm-train.jsonl", problems[:TRAIN]),
            ("gsm-test.jsonl", problems[TRAIN:]),
            ("equivalence.jsonl", equivalence_rows()),
        )
    }


if __name__ == "__main__":
    DATA.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (DATA / name).write_text(text, encoding="utf-8")
        print(f"wrote {DATA / name} ({text.count(chr(10))} rows)")
