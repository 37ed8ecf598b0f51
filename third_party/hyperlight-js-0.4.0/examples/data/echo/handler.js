function handler(event) {
    return event;
}

export { handler };
