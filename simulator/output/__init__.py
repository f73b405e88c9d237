"""What a simulation is written as: the Chrome trace (``chrome_trace``), the timeline
picture (``timeline``) and figures (``figures``)."""
