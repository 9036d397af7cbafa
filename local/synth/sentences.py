"""A small-vocabulary English sentence generator for the synthetic corpus.

Sentences are built from templates (numbers, digit codes, times, dates, home
commands, statements and questions) over a closed vocabulary of about 250
words. Numbers are written out as words, so the string handed to the TTS
engine is exactly the transcript. The vocabulary is kept small on purpose: a
model trained for ~20 minutes on two CPU cores has to reach a low WER on it.

Every choice goes through the ``random.Random`` passed in, so the same seed
gives the same sentences.
"""
from __future__ import annotations

import random
from typing import Callable, Iterable, List, Optional, Sequence, Set

ONES = ["ZERO", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX", "SEVEN", "EIGHT", "NINE",
        "TEN", "ELEVEN", "TWELVE", "THIRTEEN", "FOURTEEN", "FIFTEEN", "SIXTEEN",
        "SEVENTEEN", "EIGHTEEN", "NINETEEN"]
TENS = ["", "", "TWENTY", "THIRTY", "FORTY", "FIFTY", "SIXTY", "SEVENTY", "EIGHTY", "NINETY"]
ORDINALS = ["", "FIRST", "SECOND", "THIRD", "FOURTH", "FIFTH", "SIXTH", "SEVENTH", "EIGHTH",
            "NINTH", "TENTH", "ELEVENTH", "TWELFTH", "THIRTEENTH", "FOURTEENTH", "FIFTEENTH",
            "SIXTEENTH", "SEVENTEENTH", "EIGHTEENTH", "NINETEENTH", "TWENTIETH"]
MONTHS = ["JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST",
          "SEPTEMBER", "OCTOBER", "NOVEMBER", "DECEMBER"]
DAYS = ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"]
PARTS_OF_DAY = ["IN THE MORNING", "IN THE AFTERNOON", "IN THE EVENING", "AT NIGHT"]
ROOMS = ["KITCHEN", "BEDROOM", "BATHROOM", "HALL", "OFFICE", "GARAGE", "GARDEN", "LIVING ROOM"]
DEVICES = ["LIGHTS", "HEATING", "RADIO", "FAN", "OVEN", "TELEVISION", "LAMP"]
OPENABLE = ["DOOR", "WINDOW", "GATE", "CURTAINS", "FRIDGE"]
PEOPLE = ["MOTHER", "FATHER", "SISTER", "BROTHER", "DOCTOR", "TEACHER", "FRIEND", "BOSS",
          "NEIGHBOUR", "DENTIST"]
PLACES = ["STATION", "AIRPORT", "SCHOOL", "BANK", "PARK", "SHOP", "MARKET", "LIBRARY",
          "HOSPITAL", "HOTEL", "OFFICE", "BEACH"]
THINGS = ["BOOK", "KEY", "PHONE", "BAG", "COAT", "TICKET", "LETTER", "PEN", "CUP", "BOX",
          "HAT", "CHAIR", "TABLE", "CLOCK"]
COLOURS = ["RED", "BLUE", "GREEN", "YELLOW", "BLACK", "WHITE", "BROWN", "ORANGE"]
SIZES = ["BIG", "SMALL", "OLD", "NEW"]
FOODS = ["APPLES", "EGGS", "ORANGES", "LEMONS", "POTATOES", "CARROTS", "ONIONS", "TOMATOES",
         "BANANAS", "COOKIES"]
ANIMALS = ["CATS", "DOGS", "BIRDS", "FISH", "HORSES", "RABBITS"]
DRINKS = ["COFFEE", "TEA", "WATER", "MILK", "JUICE"]
TRANSPORT = ["TRAIN", "BUS", "FLIGHT", "BOAT", "TAXI"]
TRAVEL_VERBS = ["LEAVES", "ARRIVES", "STARTS"]
EVENTS = ["MEETING", "PARTY", "CONCERT", "LESSON", "GAME", "DINNER", "LUNCH", "CLASS"]
WEATHER = ["COLD", "WARM", "HOT", "SUNNY", "RAINY", "WINDY", "CLOUDY", "FOGGY"]
SUBJECTS = ["I", "WE", "THEY", "YOU"]
PLAY_THINGS = ["SOME MUSIC", "THE NEWS", "A SONG", "THE RADIO", "A STORY", "SOME JAZZ"]
WHEN = ["TODAY", "TOMORROW", "TONIGHT", "NEXT WEEK", "THIS WEEKEND", "LATER"]
UNITS = ["MINUTES", "HOURS", "SECONDS", "DAYS"]
MONEY = ["DOLLARS", "POUNDS", "EUROS"]


def number_words(n: int) -> List[str]:
    """0 <= n < 1,000,000 → its English words ("ONE HUNDRED TWENTY FIVE", no AND)."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_words: {n} is out of range 0..999999")
    if n < 20:
        return [ONES[n]]
    if n < 100:
        return [TENS[n // 10]] + ([ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        rest = number_words(n % 100) if n % 100 else []
        return [ONES[n // 100], "HUNDRED"] + rest
    rest = number_words(n % 1000) if n % 1000 else []
    return number_words(n // 1000) + ["THOUSAND"] + rest


def ordinal_words(n: int) -> List[str]:
    """1 <= n <= 31 → ordinal words ("TWENTY FIRST"), as used for days of a month."""
    if not 1 <= n <= 31:
        raise ValueError(f"ordinal_words: {n} is out of range 1..31")
    if n <= 20:
        return [ORDINALS[n]]
    if n == 30:
        return ["THIRTIETH"]
    return [TENS[n // 10], ORDINALS[n % 10]]


def _pick(rng: random.Random, items: Sequence[str]) -> List[str]:
    return rng.choice(items).split()


def _clock_time(rng: random.Random) -> List[str]:
    """A spoken clock time: "SEVEN THIRTY", "QUARTER PAST NINE", "SIX OH FIVE", "NOON"."""
    hour = rng.randint(1, 12)
    kind = rng.random()
    if kind < 0.08:
        return [rng.choice(["NOON", "MIDNIGHT"])]
    if kind < 0.3:
        phrase = rng.choice(["QUARTER PAST", "HALF PAST", "QUARTER TO", "TEN PAST", "TWENTY TO"])
        words = phrase.split() + number_words(hour)
    elif kind < 0.45:
        words = number_words(hour)
    else:
        minute = rng.choice(range(1, 60))
        if minute < 10:
            words = number_words(hour) + ["OH"] + number_words(minute)
        else:
            words = number_words(hour) + number_words(minute)
    if rng.random() < 0.4:
        words += _pick(rng, PARTS_OF_DAY)
    return words


def _date(rng: random.Random) -> List[str]:
    """A spoken date: "MONDAY THE THIRD OF MAY", "THE TWENTY FIRST OF JUNE"."""
    words = []
    if rng.random() < 0.4:
        words.append(rng.choice(DAYS))
    words += ["THE"] + ordinal_words(rng.randint(1, 31)) + ["OF", rng.choice(MONTHS)]
    return words


def _small_number(rng: random.Random) -> List[str]:
    return number_words(rng.randint(2, 99) if rng.random() < 0.8 else rng.randint(100, 999))


def _digits(rng: random.Random, low: int = 3, high: int = 5) -> List[str]:
    return [ONES[rng.randint(0, 9)] for _ in range(rng.randint(low, high))]


def _the_thing(rng: random.Random) -> List[str]:
    words = ["THE"]
    if rng.random() < 0.5:
        words.append(rng.choice(COLOURS))
    elif rng.random() < 0.3:
        words.append(rng.choice(SIZES))
    return words + [rng.choice(THINGS)]


def _command(rng: random.Random) -> List[str]:
    kind = rng.randint(0, 8)
    if kind == 0:
        words = ["TURN", rng.choice(["ON", "OFF"]), "THE", rng.choice(DEVICES)]
        if rng.random() < 0.6:
            words += ["IN", "THE"] + _pick(rng, ROOMS)
    elif kind == 1:
        words = ["SET", "AN", "ALARM", "FOR"] + _clock_time(rng)
    elif kind == 2:
        words = ["SET", "A", "TIMER", "FOR"] + number_words(rng.randint(2, 60)) + [rng.choice(UNITS[:3])]
    elif kind == 3:
        words = ["CALL", "MY", rng.choice(PEOPLE)]
        if rng.random() < 0.5:
            words += ["AT"] + _clock_time(rng)
    elif kind == 4:
        words = ["PLAY"] + _pick(rng, PLAY_THINGS)
        if rng.random() < 0.4:
            words += ["IN", "THE"] + _pick(rng, ROOMS)
    elif kind == 5:
        words = [rng.choice(["OPEN", "CLOSE"]), "THE", rng.choice(OPENABLE)]
        if rng.random() < 0.5:
            words += ["IN", "THE"] + _pick(rng, ROOMS)
    elif kind == 6:
        words = ["SEND", "A", "MESSAGE", "TO", "MY", rng.choice(PEOPLE)]
        if rng.random() < 0.5:
            words += _pick(rng, WHEN)
    elif kind == 7:
        words = ["TURN", "THE", "VOLUME", rng.choice(["UP", "DOWN"])]
        if rng.random() < 0.5:
            words += ["TO"] + number_words(rng.randint(1, 20))
    else:
        words = ["BOOK", "A", rng.choice(["TABLE", "TAXI", "ROOM"]), "FOR"] + _date(rng)
    if rng.random() < 0.15:
        words = ["PLEASE"] + words
    return words


def _statement(rng: random.Random) -> List[str]:
    kind = rng.randint(0, 8)
    if kind == 0:
        return ["THE", rng.choice(TRANSPORT), rng.choice(TRAVEL_VERBS), "AT"] + _clock_time(rng)
    if kind == 1:
        return ["THE", rng.choice(EVENTS), "IS", "ON"] + _date(rng)
    if kind == 2:
        return ["MY", rng.choice(PEOPLE), "HAS"] + number_words(rng.randint(2, 12)) + [rng.choice(ANIMALS)]
    if kind == 3:
        return [rng.choice(SUBJECTS), "NEED"] + number_words(rng.randint(2, 20)) + [rng.choice(FOODS)] \
            + (["AND"] + number_words(rng.randint(2, 20)) + [rng.choice(FOODS)] if rng.random() < 0.4 else [])
    if kind == 4:
        return ["IT", "WILL", "BE", rng.choice(WEATHER)] + _pick(rng, WHEN) \
            + (["AND", rng.choice(WEATHER)] if rng.random() < 0.3 else [])
    if kind == 5:
        return _the_thing(rng) + ["COSTS"] + _small_number(rng) + [rng.choice(MONEY)]
    if kind == 6:
        return [rng.choice(SUBJECTS), "WILL", "MEET", "MY", rng.choice(PEOPLE), "AT", "THE",
                rng.choice(PLACES)] + (["AT"] + _clock_time(rng) if rng.random() < 0.5 else [])
    if kind == 7:
        return ["THE", "CODE", "IS"] + _digits(rng)
    return ["THE", "ROOM", "IS", "NUMBER"] + number_words(rng.randint(1, 999))


def _question(rng: random.Random) -> List[str]:
    kind = rng.randint(0, 6)
    if kind == 0:
        return ["WHAT", "TIME", "DOES", "THE", rng.choice(TRANSPORT), rng.choice(["LEAVE", "ARRIVE"])]
    if kind == 1:
        return ["WHERE", "IS", "THE", "NEAREST", rng.choice(PLACES)]
    if kind == 2:
        return ["HOW", "MUCH", "IS"] + _the_thing(rng)
    if kind == 3:
        return ["WHAT", "IS", "THE", "WEATHER", "LIKE"] + _pick(rng, WHEN)
    if kind == 4:
        return ["CAN", "YOU", "BRING", "ME", "A", "CUP", "OF", rng.choice(DRINKS)]
    if kind == 5:
        return ["IS", "THE", rng.choice(PLACES), "OPEN", "ON", rng.choice(DAYS)]
    return ["WHERE", "IS", "MY"] + _the_thing(rng)[1:]


def _arithmetic(rng: random.Random) -> List[str]:
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    op = rng.choice(["PLUS", "MINUS", "TIMES"])
    return ["WHAT", "IS"] + number_words(a) + [op] + number_words(b)


TEMPLATES: List[Callable[[random.Random], List[str]]] = [
    _command, _command, _command, _statement, _statement, _statement, _question, _question,
    _arithmetic,
    lambda rng: ["THE", "DATE", "IS"] + _date(rng),
    lambda rng: ["IT", "IS"] + _clock_time(rng),
    lambda rng: ["MY", "NUMBER", "IS"] + _digits(rng, 4, 7),
]


class SentenceGenerator:
    """Random sentences (lists of upper-case words) from the templates above.

    ``min_words``/``max_words`` bound the length so that speech lasts about
    1 to 4 seconds at the engines' speaking rates.
    """

    def __init__(self, rng: random.Random, min_words: int = 3, max_words: int = 11) -> None:
        self.rng = rng
        self.min_words = min_words
        self.max_words = max_words

    def sentence(self) -> str:
        """One sentence as a space-separated upper-case string."""
        while True:
            words = self.rng.choice(TEMPLATES)(self.rng)
            if self.min_words <= len(words) <= self.max_words:
                return " ".join(words)

    def distinct(self, n: int, exclude: Iterable[str] = (), vocab: Optional[Set[str]] = None,
                 tries_per_sentence: int = 200) -> List[str]:
        """``n`` distinct sentences not in ``exclude``, in the order drawn.

        With ``vocab`` given, sentences using a word outside it are rejected
        (held-out sets should use only words the training set covers); after
        ``tries_per_sentence`` rejections in a row that rule is dropped for
        one sentence, so a tiny training set cannot stall the draw.
        """
        excluded = set(exclude)
        out: List[str] = []
        seen: Set[str] = set()
        misses = 0
        while len(out) < n:
            s = self.sentence()
            if s in seen or s in excluded:
                misses += 1
                if misses > 100_000:
                    raise RuntimeError(f"cannot draw {n} distinct sentences; got {len(out)}")
                continue
            if vocab is not None and misses < tries_per_sentence \
                    and any(w not in vocab for w in s.split()):
                misses += 1
                continue
            seen.add(s)
            out.append(s)
            misses = 0
        return out


def vocabulary(sentences: Iterable[str]) -> Set[str]:
    """The set of words used in ``sentences``."""
    return {w for s in sentences for w in s.split()}
