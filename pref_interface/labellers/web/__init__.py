"""The labelling page: a person labels clip pairs in a browser (`--clip_player web`).

    labelling process: HumanLabeller + WebPlayer --page channel--> main process: LabellingPage
    browser <--HTTP (127.0.0.1, token)--> LabellingPage --answers queue--> HumanLabeller

The page is served by the main process, so one address lasts the whole run, across phases.
"""
