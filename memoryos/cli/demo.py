"""`memoryos demo`: the embedded default end to end — store a short conversation, recall from it, answer.

Runs offline: bundled MiniLM embeddings, the extractive LLM backend, a local directory.
"""

from pathlib import Path

from memoryos.facade.memoryos import Memoryos

DEMO_CONVERSATION = [
    (
        "Hi! I'm Maya, I just moved to Lisbon for a job as a marine biologist.",
        "Welcome, Maya! Lisbon is lovely.",
    ),
    ("I adopted a rescue dog called Pico last weekend.", "Pico is a great name. How is he settling in?"),
    ("He loves the beach, but he is scared of trams.", "Trams can be loud; short visits may help him."),
    ("My sister Inês is visiting in October.", "You could take her to Sintra."),
    ("I'm allergic to peanuts, so I always check menus.", "Good idea. Many places in Lisbon list allergens."),
    ("Work is intense: we are tagging sea turtles off the Azores.", "That sounds fascinating."),
    ("I started learning Portuguese on Tuesday evenings.", "Boa sorte! Practice with your neighbours."),
    ("I'm thinking about running the Lisbon half marathon in March.", "Start with three runs a week."),
    ("Pico chewed my running shoes yesterday.", "Time for a chew toy, maybe."),
    ("My favourite food here is grilled sardines.", "Try them at the June festivals."),
    ("I'm flying to the Azores next Monday for fieldwork.", "Safe travels, and good luck with the turtles."),
    ("Can you remind me to buy dog food before I fly?", "Noted: buy dog food before Monday."),
]

DEMO_QUESTIONS = ["What is the name of my dog?", "What am I allergic to?", "Where is my fieldwork?"]


def run_demo(data_dir: Path) -> None:
    memory = Memoryos(
        user_id="demo_user", openai_api_key=None, data_storage_path=data_dir, short_term_capacity=4
    )
    with memory:
        memory.forget_user()
    with Memoryos(
        user_id="demo_user", openai_api_key=None, data_storage_path=data_dir, short_term_capacity=4
    ) as memory:
        memory.add_memories(
            [
                {
                    "user_input": user,
                    "agent_response": agent,
                    "timestamp": f"2026-03-0{1 + i // 3} 1{i % 10}:00:00",
                }
                for i, (user, agent) in enumerate(DEMO_CONVERSATION)
            ]
        )
        memory.force_mid_term_analysis()
        for question in DEMO_QUESTIONS:
            context = memory.retrieve(question, top_k=2)
            print(f"\nQ: {question}")
            for page in context.retrieved_pages:
                print(f"   memory [{page.tier}, score {page.score:.2f}]: {page.user_input}")
            print(f"A: {memory.get_response(question)}")
        stats = memory.stats()
        print(
            f"\nstored in {memory.space.directory}: {stats.short_term_pages} short-term, {stats.mid_term_pages} "
            f"mid-term pages in {len(stats.segments)} segments, {stats.user_knowledge} user facts"
        )
        print(f"profile:\n{memory.get_user_profile_summary() or '(empty)'}")
