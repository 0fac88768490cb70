"""MemoryBank's English probing questions, labelled as ``bench/memorybank.py`` labels the
Chinese ones: an answer key written by hand, turned into evidence by the same rule.

The English files (``memory_bank_en.json``, ``probing_questions_en.jsonl``) are a
translation of the Chinese: the same 15 users (``Emily`` is 张曼婷) and the same questions
in the same order, the dialogues mostly message for message. ``ANSWERS`` holds, per
question, short strings copied from the English message that states the answer, found by
reading that user's English dialogues with the Chinese key beside them (before any method
was run). A question's evidence is every message of its user holding one of its strings,
on the day it names if it names one ("On May 2nd"). Skipped and counted: questions about a
whole day (``memorybank.WHOLE_DAY``) and one whose day has no English dialogue (John
Zhang's May 5th is empty in the English file).

Loaded by ``bench/quality.py``; ``uv run python bench/memorybank_en.py FOLDER`` prints
every label, as ``bench/memorybank.py --labels`` does.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import date
from pathlib import Path

from memorybank import WHOLE_DAY, Message, User, answered, label, messages_of, print_labels, user_of

NOT_IN_TEXT = "the day it names has no English dialogue"
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAY_NAMED = re.compile(rf"\b({'|'.join(MONTHS)}) (\d{{1,2}})(?:st|nd|rd|th)?\b")
ABSENT = ()
"""An answer that the English dialogues do not hold."""

ANSWERS: dict[str, tuple[tuple[str, ...] | None, ...]] = {
    # Per user, in the order of its probing questions: strings of the message(s) that
    # state the answer, None (WHOLE_DAY) or ABSENT. Written by reading the dialogues.
    "Emily": (
        ("The Wandering Earth",),  # the sci-fi film she recommended
        ("One Hundred Years of Solitude",),  # the novel read in the library
        ("Leonardo da Vinci",),  # the painters recommended
        ("cherry blossom",),  # what she saw in the park
        ("young taxi driver",),  # what "Taxi Driver" is about
        ("exhibition of ancient artwork",),  # the exhibition on May 2nd
        ("important speech",),  # the problem on May 4th
    ),
    "Frank": (
        ("for an hour",),  # how long he ran on April 27th
        ("Home Cooking",),  # the food programme he recommended
        ("Emei Mountain",),  # hiking places recommended
        ("especially jazz", "jazz music is really great"),  # the music he likes
        ('"To Live"',),  # the book on May 6th
        ("stressed out at work",),  # why he asked about stress on April 30th
        ("Civilization",),  # the world-history game
    ),
    "Lucy": (
        ("I loved Gulangyu",),  # favourite place in Xiamen
        ("Jay Chou's concert", "Listen to Mom"),  # whose concert, favourite song
        ("I like comedies and romance films",),  # film genres
        ("Sichuan and Cantonese cuisine",),  # cuisines
        ("meditation, breathing exercises, and yoga", "reading books or doing yoga"),  # stress
        ("listening to English songs",),  # English listening and speaking
        ("I like comedies and romance films",),  # "I don't like comedies, right?"
    ),
    "Sunny": (
        ("HIIT",),  # workout methods
        ("ran out of food",),  # the trouble on the mountain
        ("Crazy Alien",),  # films recommended on May 3rd
        ("fitness trainer complimented",),  # the happy thing on May 1st
        (
            "singing, dancing, working out",
            "fitness has been a great help",
        ),  # "I don't like working out?"
        ("Qingdao, a seaside city",),  # the seaside city recommended
        ("long exposure",),  # photography tips
    ),
    "Jason": (
        ("planning a trip to New Zealand",),  # the country he plans to visit
        ("Chinese food and Japanese cuisine",),  # cuisines
        ("really enjoy outdoor activities",),  # "I don't like outdoor activities?"
        ("The Shawshank Redemption",),  # the film recommended
        ("ancient painting and sculpture",),  # the museum exhibits
        ("beaches, mountains, and lakes",),  # where he likes to shoot
        ("postcard or an art book",),  # the gift recommended on May 4th
    ),
    "Linda": (
        ('"The Stranger", "Gone with the Wind"',),  # books she shared on May 6th
        ("Dream of the Red Chamber",),  # books she recommended on May 6th
        None,  # what was talked about on April 27th
        ("OneNote",),  # the note-taking software on April 28th
        ("new white dress",),  # the dress on May 2nd
        ("trip to Mexico",),  # the travel plan on May 1st
        ("go to Spain",),  # the travel plan on May 4th
    ),
    "John Zhang": (
        ("sunny and warm weather",),  # "I don't like warm weather?"
        None,  # what was talked about on April 29th
        ("Looking Up",),  # the day he watched "Looking Up"
        ('dish called "Hui Guo Rou"',),  # the dish on April 30th
        ABSENT,  # the dish on May 5th: that day is empty in the English file
        ("Titanic",),  # the romance film
        ("Emotional Intelligence",),  # the psychology book
    ),
    "Ivy": (
        None,  # the first conversation
        ("unemployed father",),  # what "The Pursuit of Happyness" is about
        ("down and anxious",),  # her mood on May 2nd
        ("vinegar, sugar, soy sauce",),  # the sweet and sour fish recipe
        ("About eight people",),  # the badminton group
        ("moderate exercise, rest, and yoga",),  # how to relax
        ("deep breathing, meditation, or exercise",),  # anxiety and depression
    ),
    "Henry": (
        ("enjoy playing badminton, running",),  # "I don't like badminton or running?"
        ("weather is really hot",),  # the weather on April 30th
        ("chords and sheet music",),  # guitar advice
        ("Hackers and Painters",),  # the books recommended
        (
            "trouble understanding the concept of functions",
            "how to define and use the parameters",
        ),  # the programming problem
        ("fry the pork ribs",),  # the sweet and sour ribs recipe
        ("good sleep and dietary habits",),  # healthy living
    ),
    "Gary": (
        ("Spicy Pork Tripe",),  # the dish on April 28th (not twice-cooked pork)
        ("color, shape, and perspective",),  # painting advice
        ("The Chef Competition",),  # the cooking shows
        ("describes the life journeys",),  # what the book is about
        None,  # what was talked about on May 2nd
        ("Montreal Grand Prix",),  # the races recommended
        ("moderate exercise, listening to music, reading",),  # relieving stress
    ),
    "Jack": (
        ("Taylor Swift",),  # the music recommended on April 27th
        ("Avengers: Infinity War",),  # the films recommended on April 27th
        ("favorite music genres are rock and pop",),  # the music he likes
        ("Police Story",),  # the police action film
        ("Manchester by the Sea",),  # the film on May 3rd
        ("mozzarella cheese pasta",),  # the Italian dishes on May 2nd
        ("today is my birthday",),  # "May 4th is not my birthday?"
    ),
    "Roland": (
        ("Arknights",),  # the games recommended
        ("Parasite",),  # the films recommended
        None,  # what was talked about on April 30th
        ("moving to another city",),  # why he was upset on May 2nd
        ("reasonable study plan", "take notes"),  # learning programming efficiently
        ("skateboarding, climbing, and dancing",),  # outdoor sports
    ),
    "Susan": (
        ("listening to rock music", "I like rock music"),  # the music she likes
        ("AC/DC",),  # the rock bands
        ("trip I took to Tibet",),  # what inspired the painting
        ("getting angry with me",),  # the emotional issue
        ("paper origami",),  # the craft projects
    ),
    "Luna": (
        ("issue with a project",),  # the problem at work
        ("minor issues have been going on at home", 'concept of "emotional release"'),  # April 30th
        ("it's raining today",),  # the weather on May 4th
        ("deep breathing exercises",),  # relaxing and reducing stress
        ("Dangal",),  # the film she shared
    ),
    "Leo": (
        ("Bach's Orchestral Suites",),  # the classical pieces he likes
        ("The Shawshank Redemption",),  # the film on May 2nd
        ("music in the prison yard",),  # his favourite scene
        ("Jane Eyre",),  # the romance novels on May 3rd
        ("Autobiography of Benjamin Franklin",),  # the biographies on May 3rd
        ("Headspace",),  # the meditation apps
        ("I feel physically and mentally exhausted",),  # why he asked on May 6th
    ),
}


def named_day(question: str, days: Sequence[str]) -> str | None:
    """The day an English question names ("On May 2nd"), in the year of the dialogues."""
    found = DAY_NAMED.search(question)
    if found is None:
        return None
    year = date.fromisoformat(days[0]).year
    return date(year, MONTHS.index(found[1]) + 1, int(found[2])).isoformat()


def load(folder: Path) -> tuple[list[User], Counter[str]]:
    """The English users with their labelled questions, and the skips by reason."""
    bank = {
        name.strip(): data
        for name, data in json.loads((folder / "memory_bank_en.json").read_text("utf-8")).items()
    }  # some names carry spaces: " Jason "
    probes: dict[str, list[str]] = {}
    for line in (folder / "probing_questions_en.jsonl").read_text("utf-8").splitlines():
        if line.strip():
            probes.update({k.strip(): v for k, v in json.loads(line).items()})
    if set(probes) != set(ANSWERS) or not set(probes) <= set(bank):
        raise SystemExit("the English probing questions name other users than the answer key")
    users = []
    skipped: Counter[str] = Counter()
    for name, data in bank.items():
        messages = messages_of(name, data["history"])
        questions = []
        for index, text, answer in answered(name, probes[name], ANSWERS[name]):
            if answer is None:
                skipped[WHOLE_DAY] += 1
            elif answer == ABSENT:
                skipped[NOT_IN_TEXT] += 1
            else:
                questions.append(label(name, index, text, answer, on_day(text, messages)))
        users.append(user_of(name, messages, questions))
    return users, skipped


def on_day(question: str, messages: list[Message]) -> list[Message]:
    """The messages of the day the question names (all of them if it names none): the pool
    ``memorybank.label`` looks for the answer in. (``label`` reads only Chinese dates, so
    the categories it gives an English question say ``undated``; nothing here uses them.)"""
    day = named_day(question, sorted({m.day for m in messages}))
    if day is not None and not any(m.day == day for m in messages):
        raise SystemExit(f"{question!r} names {day}, a day without dialogue")
    return [m for m in messages if day is None or m.day == day]


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: memorybank_en.py MEMORYBANK_FOLDER")
    users, skipped = load(Path(sys.argv[1]))
    print_labels(users)
    print("skipped: " + ", ".join(f"{why} {n}" for why, n in sorted(skipped.items())))


if __name__ == "__main__":
    main()
