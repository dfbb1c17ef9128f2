"""Readers and writers: column files (:mod:`crfkit.io.columns`), CRFsuite attribute files
(:mod:`crfkit.io.crfsuite`) and atomic writes (:mod:`crfkit.io.atomic`); errors name the file and line."""
