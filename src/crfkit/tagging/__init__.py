"""Tagged text out of a model: the engine behind ``crfkit tag`` and ``crfkit serve``.

:func:`run_tag` tags a column file or a CRFsuite attribute file with a loaded model and writes what
``crfkit tag`` writes (``crf_test`` / ``crfsuite tag`` layouts, marginals, probabilities, the
``--eval`` report), reading and writing batch by batch; its options are a :class:`TagOptions`.  The
command line (:mod:`crfkit.cli.tag`) fills them from its arguments, the HTTP service
(:mod:`crfkit.serving`) from a request's query.  With n-best lists, constraints, forced labels or
posterior decoding (:func:`wants_decoding`) the work goes to :func:`run_decoding`.

Column files: the output is ``crf_test``'s.  With ``-n K`` every sentence is written K times (fewer
when it has fewer label sequences), each preceded by ``# k p`` (rank from 0, probability of that
sequence) and followed by a blank line, as ``crf_test -n K``.  ``--allowed-column N`` names an input
column (1-based) holding each token's allowed labels (``B-NP|I-NP``; ``*``, ``?``, ``_`` or an empty
cell: any label); the column is not an observation (the templates do not see it) but is written
back.  ``--force`` reads the input's last column so (``wapiti label --force``): a token with a label
keeps it, ``?`` leaves it free, the others are decoded consistently with them.

CRFsuite attribute files: one label per line, a blank line after each sequence; with ``-n K`` each
candidate is preceded by ``@nbest<TAB>k<TAB>p`` (and followed by a blank line).  ``--force`` reads
the first field (the label) as above.

Also here, because the tagging needs them and the CLI's other commands share them (through
:mod:`crfkit.cli.common`): input format detection (:func:`detect_format`), re-encoding to UTF-8
(:func:`recode`), the atomic output (:class:`Output`, :func:`open_out`) and the ``--eval`` report
(:class:`EvalReport`, :func:`report_eval`).  Nothing here imports numpy at import time.
"""

from .decoding import FREE, SCHEMES, label_cell, parse_pair, run_decoding, wants_decoding
from .files import (
    EXIT_ERROR,
    FORMATS,
    EvalReport,
    Output,
    close_source,
    crfsuite_sequence,
    detect_format,
    open_out,
    print_error,
    print_stderr,
    read_attribute_file,
    recode,
    report_eval,
    source_name,
)
from .run import TagOptions, run_tag

__all__ = [
    "EXIT_ERROR",
    "EvalReport",
    "FORMATS",
    "Output",
    "close_source",
    "crfsuite_sequence",
    "detect_format",
    "open_out",
    "print_error",
    "print_stderr",
    "read_attribute_file",
    "recode",
    "report_eval",
    "source_name",
    "TagOptions",
    "run_tag",
    "FREE",
    "SCHEMES",
    "label_cell",
    "parse_pair",
    "run_decoding",
    "wants_decoding",
]
