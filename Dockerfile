# The flowplanner image: the planner worker (`flowplanner run`) and the simulated fleet
# (`flowplanner fleet`) of the compose stack.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY operators operators
COPY connectors connectors
COPY flows flows
COPY sim sim
COPY bench bench
COPY examples examples
COPY deploy deploy
COPY tests/data tests/data
# editable: the commands find their default config, trace and profile beside the code (/app)
RUN pip install --no-cache-dir -e .
ENV OPENBLAS_NUM_THREADS=1
ENTRYPOINT ["flowplanner"]
CMD ["--help"]
