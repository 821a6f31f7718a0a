"""What to send: scenario, corpora, prompts, distributions, token counting, traces, arrivals, steps.

Pure and cheap to import (no gevent, no Locust, no sockets): a scenario goes in, prompts and
schedules come out, so every room that receives a scenario can import its types.
"""
