"""Mistake: save puts the path in Unicode normal form NFC ("one spelling per name"): a name holding a decomposed
letter (e + U+0301) is written under its composed twin, beside or onto another file."""

import os
import unicodedata

from shardlab.learner.reference import *  # noqa: F403
from shardlab.learner.reference import save as reference_save


def save(path, state, contract_):
    return reference_save(unicodedata.normalize("NFC", os.fspath(path)), state, contract_)
