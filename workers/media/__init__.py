"""Media transcoding: image thumbnails (Pillow), voice to Opus/Ogg and video poster +
preview (PyAV), and the ``media_transcode`` job that runs them off the event loop."""
