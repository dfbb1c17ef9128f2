"""Features: from tokens to the weight vector's layout, below the model.

``space`` (the feature space: the parameter layout, the packed string tables, the every-pair
layout), ``templates`` (CRF++ / Wapiti template syntax), ``windows`` (template presets), ``rows``
(token rows to attributes through a model's metadata), ``encode`` (attribute lists to the encoded
corpus and the feature space), ``dicts`` / ``dictenc`` (sklearn-crfsuite's feature dicts),
``tplenc`` (template rows to attribute ids without the strings), ``lazy`` (attribute sequences made
a chunk at a time). Nothing here imports the model, the model file, the pipeline or the training
code.
"""
