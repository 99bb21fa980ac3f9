"""Talking to Kubernetes: the one client configuration (`client`) and TokenReview
(`token_review`). Needs kubernetes_asyncio."""
